"""`callback`: a step waits for its URL to be called (or its timeout): its item, the
callback's index item and its `step.waiting` event, under the lease."""

from __future__ import annotations

from ezgh_engine.adapters.intents import Intent, NewItem, NewStep
from ezgh_engine.core.models import Step
from ezgh_engine.protocol.ops import Callback
from ezgh_engine.protocol.results import Ok
from ezgh_engine.service import callbacks
from ezgh_engine.service.step_ops.plan import Caller, Fresh, Plan, event, recorded


def prepare(caller: Caller, fresh: Fresh, request: Callback) -> tuple[tuple[NewStep, NewItem], str]:
    """The callback's writes and URL (its secret is drawn here)."""
    return callbacks.create_actions(
        caller.run_id,
        caller.claims.project_id,
        request.step_id,
        request.name,
        request.timeout_seconds,
        order=fresh.order,
        at=fresh.at,
        expires=fresh.expires,
    )


def plan(
    caller: Caller,
    fresh: Fresh,
    request: Callback,
    prepared: tuple[tuple[NewStep, NewItem], str],
    *,
    leased: bool,
) -> Plan:
    del leased
    (item, index), url = prepared
    others: tuple[Intent, ...] = (index, event(caller, fresh, "step.waiting", request.step_id))
    return Plan(request.step_id, Ok(request.step_id, url), item, others)


def replan(plan: Plan, step: Step | None, at: str) -> Plan:
    del at
    return recorded(plan.step_id, step)
