"""Replica allocation across variants and accelerator types: a lexicographic integer program.

Every model has a load (req/s) and can be served by one or more *variants* (the model on an
accelerator configuration, with its own performance profile).  :func:`solve` decides the number of
replicas of every variant so that

* each model's load is served (``sum_v replicas_v * max_rate_v + unserved_m >= load_m``; the load may
  be split over the model's variants),
* per accelerator type, ``sum_v accelerators_per_replica_v * replicas_v <= inventory[type]``,
* ``min_replicas <= replicas_v <= max_replicas``,

lexicographically minimising

1. unserved load in req/s, strictly by priority (1 = highest): first the priority-1 models' total
   unserved load, then priority 2's with priority 1's total frozen at what stage 1 reached, and so on;
2. accelerator cost ``sum unit_cost[acc] * accelerators_per_replica * replicas`` plus a transition
   penalty ``transition_penalty * cost_per_replica_v * |replicas_v - current_replicas_v|`` that breaks
   ties toward the current allocation and stops load moving between accelerators for savings smaller
   than the penalty.

The stages are solved in sequence (not with big-M weights, which would make the gap meaningless).
Freezing a level means freezing its **total**: a later stage may still move unserved load between
models of the same priority, e.g. to keep a running replica instead of starting a new one.

How the package reads, stage by stage:

* :mod:`.problem` -- inputs, result, per-replica sizing of every variant (WVA's queueing model);
* :mod:`.search` -- the exact per-model search (one model's cheapest replica counts, with prices);
* :mod:`.greedy` -- the WVA-style greedy baseline every solve starts from and is checked against;
* :mod:`.decomposition` -- column generation over per-model patterns and its Lagrangian bound, the
  default whenever an inventory couples the models;
* :mod:`.milp` -- the compact MILP through PuLP (HiGHS or CBC), for what the decomposition does not
  cover (floors that do not fit, CBC);
* :mod:`.solver` -- :func:`solve`, which chooses among them.

Decisions worth knowing:

* Variants whose SLO cannot be met (:class:`engine.perf.sizing.Infeasible`), whose model is unknown or whose
  accelerator has no unit cost are *excluded* from serving and reported in ``infeasible_variants``;
  they are held at their ``min_replicas`` (a floor the operator asked for) with no serving capacity.
* An accelerator type missing from ``inventory`` (or ``inventory=None``) is unlimited.
* If the ``min_replicas`` floors alone exceed an accelerator's inventory the problem is infeasible: the
  status is ``"infeasible"`` but a best-effort allocation that respects the inventory is still
  returned (floors are relaxed, each missing floor replica minimised before any unserved load).
* Models none of whose variants touch a limited accelerator are independent: a single usable variant
  is sized in closed form, ``max(ceil(load/max_rate), min_replicas)`` (capped by ``max_replicas``),
  exactly like WVA's per-variant sizing; several by the exact per-model search.
* Gaps: an unserved-load stage's gap is relative to its level's demand (req/s a better allocation
  might still serve, as a share of what the level asks for -- the quantity an operator reads as
  "share of priority p served"; relative to the unserved or the served load it would blow up as
  either approaches zero); the cost stage's is relative to cost plus transition penalty.
  ``Allocation.gap`` is the largest, ``Allocation.stage_gaps`` has each.
* Status ``"optimal"`` only when every stage is proven within ``mip_gap``; a stage cut short by the
  time limit is ``"feasible"``, with its proven gap.  (PuLP's ``LpStatus`` says "Optimal" for
  time-limited runs; the solution status is what is read.)
* Never worse than the greedy baseline: checked at the end (lexicographic unserved load, then cost
  plus penalty), the baseline is returned otherwise.
* Deterministic: models and variants are processed in name order, the search and HiGHS are
  deterministic, and the Python work is charged to the time limit at a fixed rate per search node;
  only the solver's own run time, when the time limit binds, can cut work differently from run to run.

Pure: no I/O, no clock (the solver's own time limit aside).
"""

from engine.allocation.greedy import greedy
from engine.allocation.milp import status_from_solution
from engine.allocation.problem import Allocation, AllocationProblem, ModelDemand, VariantOption, variant_rates
from engine.allocation.solver import solve

__all__ = [
    "ModelDemand",
    "VariantOption",
    "AllocationProblem",
    "Allocation",
    "solve",
    "greedy",
    "variant_rates",
    "status_from_solution",
]
