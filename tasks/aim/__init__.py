"""The I/O of the three AIM lifecycles (discover-models, resolve-templates, rollout-services).

- :mod:`tasks.aim.read`: everything one run reads, one LIST per kind, typed (:class:`~tasks.aim.read.AimState`);
- :mod:`tasks.aim.images`: registry credentials from pull secrets and image reads (discovery's input);
- :mod:`tasks.aim.writes`: writing through the objects as read (status where it changed, with the read
  ``resourceVersion``; create, apply, delete; the run's counts; status Events);
- :mod:`tasks.aim.caches`: the ModelCaches a run knows and requests, shared by its workers;
- :mod:`tasks.aim.discover`, :mod:`tasks.aim.resolve`, :mod:`tasks.aim.rollout`: each lifecycle's writes of the plan
  the engine decided (:mod:`engine.aim.discovery_plan`, :mod:`engine.aim.template_plan`, :mod:`engine.aim.service_plan`).

Import from the module that defines a name; this package re-exports nothing.
"""
