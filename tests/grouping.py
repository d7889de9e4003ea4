"""One worker per shared fixture: under ``pytest -n N --dist loadgroup`` (./dev.sh test), every test of a module that
uses a module-, class- or package-scoped fixture (a Prefect server, a private API server, a deployed pool) is
marked ``xdist_group`` by its module, so the fixture starts once, as in a serial run; the other tests spread
one by one. tests/test_grouping.py checks that pytest-xdist honours the marks with the installed pytest.

pytest-xdist hands out the groups first (the largest first) and then the single tests in collection order, so a
long test collected last ends the run alone on one worker while the others idle. Single tests that run a flow
or start a command (they use the worker's Prefect API) take seconds to minutes; the pure ones take
milliseconds. The flow tests are therefore collected first and the pure ones fill the gaps at the end. Before
both come the tests marked ``long_wall``: half a minute or more of wall time, much of it waiting (the demo, a wait on
Prometheus's clock), which otherwise started in the last minute of a run and ended it alone (a full run on the
idle machine: the last 60 s at 26 % of the 2 cores)."""

from __future__ import annotations

import pytest

LONG_WALL = "long_wall"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{LONG_WALL}: the test takes half a minute or more of wall time; handed out before the others"
    )


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test whose fixtures include a module-, class- or package-scoped one with its module as
    ``xdist_group``; runs before pytest-xdist's own hook, which reads the marks."""
    for item in items:
        if item.get_closest_marker("xdist_group") is not None:
            continue
        fixture_info = getattr(item, "_fixtureinfo", None)
        if fixture_info is None:
            continue
        shares = any(
            definition.scope in ("module", "class", "package")
            for definitions in fixture_info.name2fixturedefs.values()
            for definition in definitions
        )
        if shares:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))
    # Stable: each part keeps its collection order.
    items.sort(key=lambda item: (item.get_closest_marker(LONG_WALL) is None, not runs_flows(item)))


def runs_flows(item: pytest.Item) -> bool:
    """Whether the test runs a flow or starts a command: it uses the worker's Prefect API."""
    return bool({"prefect_api", "prefect_harness"} & set(getattr(item, "fixturenames", ())))
