"""One optimization cycle: parse the VariantAutoscalings and ConfigMaps, plan replicas, write status.

Decides, for every variant, how many replicas on which accelerator (through :mod:`engine.allocation` and
:mod:`engine.perf`), how they are applied (actuation modes, Kthena-style scaling, policy bindings) and what the
status says. One module per decision, in the order a cycle takes them:

* :mod:`~engine.optimize.config` and :mod:`~engine.optimize.spec` -- the ConfigMaps and VariantAutoscalings
  parsed into typed inputs (:class:`~engine.optimize.spec.CycleInputs`);
* :mod:`~engine.optimize.model_based` -- SLO sizing and the allocation MILP;
* :mod:`~engine.optimize.plan` -- every decision of the cycle (:func:`~engine.optimize.plan.plan_cycle`,
  the optimize flow's one engine call), with :mod:`~engine.optimize.bindings` and
  :mod:`~engine.optimize.scaling` for Kthena bindings;
* :mod:`~engine.optimize.status` and :mod:`~engine.optimize.actuation` -- what is written back and who scales.
"""
