"""`cancel` and `reject`: a step ends at once, `cancelled` (its run is cancelling) or
`failed` (a wait that can't be, e.g. a sleep over a year). A new step is put ended; a
pending one is updated on the condition that its status has not moved (its message waiter's
index goes with it, a child run is cancelled once written); an ended one answers what is
recorded."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ezgh_engine.adapters import steps_store as store
from ezgh_engine.adapters.intents import Intent, NewStep, StepChange
from ezgh_engine.core.models import Step
from ezgh_engine.core.protocol_rules import STEP_ENDED_STATUSES
from ezgh_engine.protocol.ops import Cancel, Reject
from ezgh_engine.protocol.results import Ok
from ezgh_engine.service import waits
from ezgh_engine.service.step_ops.plan import Caller, Fresh, Plan, event, recorded


@dataclass(frozen=True)
class Existing:
    """The step as read before its plan (None: new), and the writes a pending one's end
    needs besides its own (its message waiter's index)."""

    step: Step | None
    extra: tuple[Intent, ...] = ()


def prepare(caller: Caller, fresh: Fresh, request: Cancel | Reject) -> Existing:
    del fresh
    step = store.get_step(caller.run_id, request.step_id)
    if step is None or step.status in STEP_ENDED_STATUSES:
        return Existing(step)
    return Existing(step, tuple(waits.cancel_step_actions(None, caller.run_id, step)))


def plan(
    caller: Caller, fresh: Fresh, request: Cancel | Reject, prepared: Existing, *, leased: bool
) -> Plan:
    del leased
    step_id, existing = request.step_id, prepared.step
    if existing is not None and existing.status in STEP_ENDED_STATUSES:
        return recorded(step_id, existing)
    if isinstance(request, Cancel):
        status, error = "cancelled", waits.CANCELLED_ERROR.to_api()
    else:
        status, error = "failed", request.error.to_api()
    sets = {"status": status, "endedAt": fresh.at, "error": error}
    ended = event(caller, fresh, f"step.{status}", step_id, error=error)
    if existing is None:
        values = {**sets, **_new(request, fresh)}
        return Plan(step_id, Ok(step_id), NewStep(caller.run_id, step_id, values), (ended,))
    item = StepChange(
        caller.run_id,
        step_id,
        sets,
        "#status = :was",
        {":was": existing.status},
        remove=("wakeAt",),
    )
    child = existing.child_run_id if existing.kind == "invoke" else None
    return Plan(step_id, Ok(step_id), item, (*prepared.extra, ended), cancel_child=child)


def _new(request: Cancel | Reject, fresh: Fresh) -> dict[str, Any]:
    """The rest of a step item put ended at once."""
    return {
        "name": request.name,
        "kind": request.kind,
        "attempt": 1,
        "order": fresh.order,
        "startedAt": fresh.at,
        "ttl": fresh.expires,
    }


def replan(plan: Plan, step: Step | None, at: str) -> Plan:
    del at
    return recorded(plan.step_id, step)
