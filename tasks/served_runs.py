"""The runs a lost serving replica left behind, handed back to the schedule when another replica takes the Lease.

A replica of ``modelplane serve-deployments --leader-elect`` fetches its runs ahead of their time (Pending, each
holding its deployment's concurrency slot) and runs them in subprocesses (Running). When it dies without
releasing anything (a node lost, a pod killed), Prefect's server keeps those states: the slot of a deployment
with a concurrency limit stays taken until its lease expires (minutes), and every run of the control loop waits
behind it ("AwaitingConcurrencySlot"). The replica that takes the Lease over knows the previous holder is gone,
and only a Lease holder serves these deployments, so before serving it moves each such run on: a Pending run back
to Scheduled at the time it was due (it runs on time, from here), a Running or Cancelling one to Crashed, which
releases the slot (the next cycle is its retry, as for any crashed cycle).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from prefect.client.schemas.objects import State

ORPHANED = ("PENDING", "RUNNING", "CANCELLING")


@dataclass(frozen=True)
class ServedDeployment:
    """A deployment this process serves, by its flow's name and its own."""

    flow: str
    name: str


def recover_orphaned_runs(deployments: Iterable[ServedDeployment], previous_holder: str | None) -> list[str]:
    """Reschedule the Pending runs and crash the Running ones of ``deployments`` (see the module docs); the names of
    the runs moved.

    Args:
        deployments: The deployments this replica is about to serve.
        previous_holder: Who held the Lease before (for the states' messages), if known.

    Returns:
        One line per run moved: its name, the state it was in and the state it is in now.
    """
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        DeploymentFilter,
        DeploymentFilterId,
        FlowRunFilter,
        FlowRunFilterState,
        FlowRunFilterStateType,
    )
    from prefect.client.schemas.objects import StateType
    from prefect.exceptions import ObjectNotFound
    from prefect.states import Crashed, Scheduled

    holder = previous_holder or "the previous Lease holder"
    moved: list[str] = []
    with get_client(sync_client=True) as client:
        ids = []
        for deployment in deployments:
            try:
                ids.append(client.read_deployment_by_name(f"{deployment.flow}/{deployment.name}").id)
            except ObjectNotFound:  # never served before: nothing of it can be left
                continue
        if not ids:
            return moved
        runs = client.read_flow_runs(
            deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=ids)),
            flow_run_filter=FlowRunFilter(
                state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType(kind) for kind in ORPHANED]))
            ),
        )
        for run in runs:
            was = run.state.name if run.state else "?"
            new: State[Any]
            if run.state is not None and run.state.type == StateType.PENDING:
                new = Scheduled(scheduled_time=run.expected_start_time, message=f"fetched by {holder}, which is gone")
            else:
                new = Crashed(message=f"{holder}, which ran it, lost its Lease")
            client.set_flow_run_state(run.id, new, force=True)
            moved.append(f"{run.name}: {was} -> {new.name}")
    return moved
