"""A replica that takes the serving Lease over hands back the runs the lost leader left (tasks/served_runs.py), on a
real Prefect API: a Pending run returns to Scheduled at the time it was due, a Running one is Crashed, and the
deployment's concurrency slot they held is free again, so the next run starts instead of waiting minutes for the
slot's lease to expire."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tasks.served_runs import ServedDeployment, recover_orphaned_runs


@pytest.fixture()
def served(prefect_api: str) -> Any:
    """A deployment limited to one run at a time (as prefect.yaml's optimize: ENQUEUE), as a served one is."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.objects import ConcurrencyLimitStrategy, ConcurrencyOptions

    name = f"served-{uuid.uuid4().hex[:8]}"
    with get_client(sync_client=True) as client:
        flow_id = client.create_flow_from_name(name)
        deployment_id = client.create_deployment(
            flow_id,
            f"{name}-local",
            concurrency_limit=1,
            concurrency_options=ConcurrencyOptions(collision_strategy=ConcurrencyLimitStrategy.ENQUEUE),
        )
    return ServedDeployment(name, f"{name}-local"), deployment_id


def new_run(client: Any, deployment_id: Any, due: datetime) -> Any:
    from prefect.states import Scheduled

    return client.create_flow_run_from_deployment(deployment_id, state=Scheduled(scheduled_time=due))


def propose(client: Any, run_id: Any, state: Any) -> str:
    """Propose ``state`` as a runner would; the state the server settled on."""
    result = client.set_flow_run_state(run_id, state)
    return str(result.state.name if result.state else "?")


def test_the_lost_leaders_runs_are_handed_back_and_release_the_slot(served: Any) -> None:
    from prefect.client.orchestration import get_client
    from prefect.states import Pending, Running

    deployment, deployment_id = served
    now = datetime.now(UTC)
    with get_client(sync_client=True) as client:
        running = new_run(client, deployment_id, now - timedelta(seconds=60))
        assert propose(client, running.id, Pending()) == "Pending"
        assert propose(client, running.id, Running()) == "Running"  # the leader's cycle, holding the slot
        prefetched = new_run(client, deployment_id, now + timedelta(seconds=30))
        # The leader fetched the next cycle ahead of time: with the slot taken it is told to wait.
        assert propose(client, prefetched.id, Pending()) == "AwaitingConcurrencySlot"

        moved = recover_orphaned_runs([deployment], "replica-a")

        assert moved == [f"{running.name}: Running -> Crashed"]
        crashed = client.read_flow_run(running.id)
        assert crashed.state is not None and crashed.state.name == "Crashed"
        assert "replica-a" in (crashed.state.message or "")
        # The slot is free: the next cycle goes Pending at once.
        assert propose(client, prefetched.id, Pending()) == "Pending"

        moved = recover_orphaned_runs([deployment], "replica-b")  # and that one is left by the next leader

        assert moved == [f"{prefetched.name}: Pending -> Scheduled"]
        back = client.read_flow_run(prefetched.id)
        assert back.state is not None and back.state.type.value == "SCHEDULED"
        assert back.state.state_details.scheduled_time == back.expected_start_time  # due when it was due
        third = new_run(client, deployment_id, now)
        assert propose(client, third.id, Pending()) == "Pending"  # its slot was released too


def test_nothing_to_hand_back_when_the_deployment_was_never_served(prefect_api: str) -> None:
    assert recover_orphaned_runs([ServedDeployment("never-served", "never-served-local")], None) == []
