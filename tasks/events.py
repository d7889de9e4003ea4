"""Prefect events that chain the lifecycles (a deployment's trigger starts the next flow)."""

from __future__ import annotations

import logging
from typing import Any, Mapping

from prefect.context import FlowRunContext
from prefect.events import emit_event

log = logging.getLogger("modelplane.events")

RESOURCE_ID = "modelplane.aim"


def emit_change(event: str, payload: Mapping[str, Any], resource_id: str = RESOURCE_ID) -> None:
    """Emit ``event`` from inside a flow run (outside one, e.g. a plain function call, nothing is sent).

    Events are a shortcut: the schedules reconcile everything anyway, so a failure to emit is logged,
    not raised.
    """
    if FlowRunContext.get() is None:
        return
    try:
        emit_event(event=event, resource={"prefect.resource.id": resource_id}, payload=dict(payload))
    except Exception as exc:  # noqa: BLE001 - the event client's failures vary by transport
        log.warning("could not emit %s: %s", event, type(exc).__name__)
