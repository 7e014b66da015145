"""`record`: a `value` step, completed at once: the Put of its whole item, refused when the
step exists (a resent call answers what is recorded)."""

from __future__ import annotations

from typing import Any

from ezgh_engine.adapters.intents import ValueRecord
from ezgh_engine.core.models import Step
from ezgh_engine.protocol.ops import Record
from ezgh_engine.protocol.results import Ok
from ezgh_engine.service.step_ops.plan import Caller, Fresh, Plan, marks, recorded


def prepare(caller: Caller, fresh: Fresh, request: Record) -> None:
    """Nothing to read: the Put's condition decides."""
    del caller, fresh, request


def plan(caller: Caller, fresh: Fresh, request: Record, prepared: Any, *, leased: bool) -> Plan:
    """The value step's Put; it is its own `step.completed` event."""
    del prepared, leased
    item = ValueRecord(
        caller.lease,
        request.step_id,
        request.name,
        "value",
        fresh.order,
        fresh.at,
        request.output_text,
        fresh.expires,
        marks(caller, fresh),
    )
    return Plan(request.step_id, Ok(request.step_id), item, carries=True)


def replan(plan: Plan, step: Step | None, at: str) -> Plan:
    del at
    return recorded(plan.step_id, step)
