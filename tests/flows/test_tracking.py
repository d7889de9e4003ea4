"""A flow run with no Prefect API (tasks/tracking.py, flows/runs.py) behaves as Prefect runs it: a task retries as
Prefect retries it, parameters are refused with Prefect's message, a flow times out; inside a Prefect flow run
the same task is a Prefect task run."""

from __future__ import annotations

import pathlib
import shutil
import time

import pytest
from typer.testing import CliRunner

from flows.runs import FlowTimeout, ParameterError, as_prefect, time_limit, validate_parameters
from tasks.tracking import task, tracked

REPO = pathlib.Path(__file__).resolve().parents[2]


def test_an_untracked_task_retries_as_prefect_retries_it() -> None:
    calls: list[int] = []

    @task(name="flaky", retries=2, retry_delay_seconds=0)
    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionError("not yet")
        return "done"

    assert not tracked() and flaky() == "done" and len(calls) == 3
    calls.clear()

    @task(name="broken", retries=1)
    def broken() -> None:
        calls.append(1)
        raise ConnectionError("never")

    with pytest.raises(ConnectionError, match="never"):
        broken()
    assert len(calls) == 2  # the first attempt and one retry
    deferred = broken.submit()  # submitted untracked: made when its result is asked for
    assert len(calls) == 2
    with pytest.raises(ConnectionError):
        deferred.result()


@pytest.mark.parametrize(
    "bad", [{"namespaces": ["Not_A_Namespace"]}, {"solver_time_limit_s": -1}, {"rate_window": "a minute"}]
)
def test_untracked_parameters_are_refused_with_prefects_message(bad: dict[str, object]) -> None:
    from prefect.exceptions import ParameterTypeError

    from flows.optimize import optimize

    with pytest.raises(ParameterTypeError) as prefect_error:
        as_prefect(optimize).validate_parameters(bad)
    with pytest.raises(ParameterError) as untracked_error:
        validate_parameters(optimize, bad)
    assert str(untracked_error.value) == str(prefect_error.value)
    assert (
        validate_parameters(optimize, {"cluster": "x", "dry_run": "true"})["dry_run"] is True
    )  # cast as Prefect casts


def test_an_untracked_flow_times_out_as_a_prefect_flow_does() -> None:
    with pytest.raises(FlowTimeout, match="flow slow timed out after 0.2 s"), time_limit("slow", 0.2):
        time.sleep(5)
    # A dependency's handler (except OSError, except Exception) never takes the time-out for its own failure:
    # before, FlowTimeout was a TimeoutError, and a Pushgateway push reported it as "unreachable" and went on.
    with pytest.raises(FlowTimeout), time_limit("swallowed", 0.2):
        try:
            time.sleep(5)
        except Exception:  # noqa: BLE001 - what a dependency's handler does
            pass
    with time_limit("quick", 5):
        time.sleep(0.01)


def test_inside_a_prefect_flow_run_the_same_task_is_a_prefect_task_run(prefect_harness: None) -> None:
    from prefect import flow
    from prefect.context import TaskRunContext

    @task(name="where-am-i")
    def where() -> bool:
        return TaskRunContext.get() is not None

    @flow(name="tracked-flow")
    def run() -> tuple[bool, bool]:
        return tracked(), where()

    assert run() == (True, True)
    assert where() is False  # the same task outside a run: a plain call


def test_an_untracked_run_sends_no_event_and_has_no_run_state() -> None:
    """Inside an untracked run there is no API to send an event to, and no run state to name Degraded: the
    flow's report says it all. Outside one (a helper emitting for a test, a Prefect run) both are as before."""
    from flows.exitcodes import flow_result
    from tasks.clients.cluster import ObjectRef
    from tasks.clients.events import emit_change
    from tasks.tracking import untracked_run

    report = object()
    with untracked_run():
        assert emit_change(ObjectRef("v1", "ConfigMap", "x", "ns"), "changed") is None
        assert flow_result(report, ["metrics missing"]) is report
    assert flow_result(report, ["metrics missing"]) is not report


def test_work_on_a_thread_pool_runs_in_the_callers_context() -> None:
    """A pool's threads start with an empty context: the untracked-run mark and every other context variable
    were gone in the AIM and optimize writes' pools."""
    from contextvars import ContextVar

    from tasks.tracking import in_untracked_run, map_in_threads, untracked_run

    marker: ContextVar[str] = ContextVar("marker", default="unset")
    marker.set("the caller's")
    with untracked_run():
        seen = map_in_threads(lambda item: (item, in_untracked_run(), marker.get()), list(range(8)), 3)
    assert seen == [(item, True, "the caller's") for item in range(8)]


def test_an_untracked_aim_run_that_requests_a_cache_sends_no_event(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cache request made on the AIM writes' pool looked tracked there and sent a Prefect event: with no API
    configured that started a temporary Prefect server (2 min 17 s for reconcile-aim here, 2 s without) and wrote
    its database in the home folder."""
    import prefect.events

    from flows.cli import app

    def no_event(**event: object) -> None:
        raise AssertionError(f"an untracked run sent an event: {event.get('event')}")

    monkeypatch.setattr(prefect.events, "emit_event", no_event)
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    cluster = tmp_path / "cluster"
    shutil.copytree(REPO / "deployments" / "examples", cluster)
    manifest = cluster / "40-aim.yaml"
    manifest.write_text(manifest.read_text().replace("hf://meta-llama/Llama-3.1-8B-Instruct", "hf://other/model"))
    mirror = f"docker.io=oci-layout:{REPO / 'deployments' / 'example-images'}"
    result = CliRunner().invoke(app, ["reconcile-aim", "--cluster", str(cluster), "--registry-mirror", mirror])
    assert result.exit_code in (0, 3), result.output
    assert "an untracked run sent an event" not in result.output and "Traceback" not in result.output
    assert list(cluster.rglob("modelcache-*.yaml")), "the run requested no cache: the test shows nothing"
