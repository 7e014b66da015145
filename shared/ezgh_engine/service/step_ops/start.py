"""`start`: a `run` step runs (again). Planned without a read when the SDK says which attempt
it expects (protocol 1.3): set exactly, on the condition that the step holds the one before;
a first attempt may ride the previous step's end (`carries`/`rides`). Otherwise (a branch's
step, no attempt given, or a batch refused) the store counts the attempt under the lease and
the answer reads it back."""

from __future__ import annotations

from typing import Any

from ezgh_engine.adapters.intents import StepStart
from ezgh_engine.core.models import Step
from ezgh_engine.protocol.ops import InlineStart, Start
from ezgh_engine.protocol.results import Started
from ezgh_engine.service.step_ops.plan import Caller, Fresh, Plan, answered, recorded


def prepare(caller: Caller, fresh: Fresh, request: Start) -> None:
    """Nothing to read: the step's own condition decides."""
    del caller, fresh, request


def plan(caller: Caller, fresh: Fresh, request: Start, prepared: Any, *, leased: bool) -> Plan:
    """The start's write. On the fast path with an attempt the answer is known; the store
    counts it otherwise (`result` None: read back)."""
    del prepared
    attempt = None if leased or caller.branch_step is not None else request.attempt
    item = StepStart(
        caller.lease,
        request.step_id,
        request.name,
        "run",
        fresh.order,
        fresh.at,
        fresh.expires,
        attempt,
    )
    if attempt is None:
        return Plan(request.step_id, None, item)
    rides = InlineStart(request.name, fresh.order, fresh.at) if attempt == 1 else None
    return Plan(request.step_id, Started(request.step_id, attempt), item, rides=rides)


def replan(plan: Plan, step: Step | None, at: str) -> Plan:
    """Refused: the step runs already for this invocation (a resent start: the same
    attempt, not another), or it has ended (what is recorded)."""
    del at
    if step is not None and step.status == "running":
        return answered(Started(plan.step_id, step.attempt), step)
    return recorded(plan.step_id, step)
