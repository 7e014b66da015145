"""The one executor of step ops: it prepares and plans each op with its module (`MODULES`),
writes the plans, and re-plans on a refusal (see `step_ops.plan` for the template).

Two ways to write:

- a batch (`apply_batch`, the fast path: a main invocation's `start` with the attempt the
  SDK expects, `complete`, `fail`, `record`, on distinct steps): one write for the lot, on
  the steps' own conditions, a new step's start riding the previous step's end (one item
  write for both); a read of the run first instead of a lease transaction;
- one op at a time under the lease (`apply_one`): any op, and every op of a batch a
  condition refused (planned again, `leased`), each answering what is recorded.

A refused write is re-planned once from the step as read; that plan writes nothing, so an op
takes at most three rounds (its batch, its own write, the answer of what is recorded).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from ezgh_engine.adapters import run_writes
from ezgh_engine.adapters import steps_store as store
from ezgh_engine.adapters.intents import Intent
from ezgh_engine.core.models import Step
from ezgh_engine.errors import ValidationError
from ezgh_engine.protocol import ops
from ezgh_engine.protocol.results import Recorded, Result, Started
from ezgh_engine.service import waits, wire
from ezgh_engine.service.step_ops import callback, cancel, checks, end, record, start
from ezgh_engine.service.step_ops.plan import Caller, Fresh, OpModule, Plan, ride

MODULES: dict[type, ModuleType] = {
    ops.Start: start,
    ops.Complete: end,
    ops.Fail: end,
    ops.Record: record,
    ops.Callback: callback,
    ops.Cancel: cancel,
    ops.Reject: cancel,
}


def module_of(request: ops.StepOp) -> OpModule:
    """The module that plans `request`'s op."""
    module: OpModule = MODULES[type(request)]
    return module


def fast(caller: Caller, requests: list[ops.StepOp]) -> bool:
    """Whether a call's ops go as one batch (see the module's docstring)."""
    if caller.branch_step is not None:
        return False
    if len({r.step_id for r in requests}) != len(requests):
        return False
    return all(
        isinstance(r, ops.Complete | ops.Fail | ops.Record)
        or (isinstance(r, ops.Start) and r.attempt is not None)
        for r in requests
    )


def apply_batch(caller: Caller, requests: list[ops.StepOp]) -> list[dict[str, Any]]:
    """Every op's result: one write for the lot when `fast`, else one op at a time."""
    if not fast(caller, requests):
        return [apply_one(caller, r) for r in requests]
    prepared = []
    plans = []
    for request in requests:  # drawn, prepared and planned in order: IDs sort by op
        fresh = Fresh.draw()
        prepared.append(module_of(request).prepare(caller, fresh, request))
        plans.append(module_of(request).plan(caller, fresh, request, prepared[-1], leased=False))
    writes, results = compose(caller, plans)
    # No lease transaction: a read of the run instead, so no step starts or ends for an
    # invocation whose run ended or moved on (a pull worker's token outlives its lease).
    checks.check_live(caller.claims)
    try:
        run_writes.write(writes)
    except run_writes.AlreadyRecorded:  # let each op say what is recorded
        return [apply_one(caller, r, p) for r, p in zip(requests, prepared, strict=True)]
    return [_wire(result) for result in results]


def _wire(result: Result) -> dict[str, Any]:
    assert not isinstance(result, Recorded)  # a batch's plans answer what they write
    return result.to_wire()


def compose(caller: Caller, plans: list[Plan]) -> tuple[list[Intent], list[Result]]:
    """A batch's writes and results: a new step's start right after an end that `carries`
    rides that end's item (`plan.ride`), so it costs no write of its own."""
    written: list[Plan] = []
    results: list[Result] = []
    previous: Plan | None = None
    for plan in plans:
        if plan.rides is not None and previous is not None and previous.carries:
            assert written[-1] is previous  # an end always writes its item
            written[-1], started = ride(previous, plan, caller)
            results.append(started)
        else:
            assert plan.result is not None  # a batch's plans know their answer
            written.append(plan)
            results.append(plan.result)
        previous = plan
    return [action for plan in written for action in plan.writes], results


def apply_one(caller: Caller, request: ops.StepOp, prepared: Any = None) -> dict[str, Any]:
    """One op under the lease; `prepared`: what a refused batch prepared for it already."""
    module = module_of(request)
    fresh = Fresh.draw()
    if prepared is None:
        prepared = module.prepare(caller, fresh, request)
    plan = module.plan(caller, fresh, request, prepared, leased=True)
    if not plan.writes:  # decided without a write (a cancel of an ended step)
        return _answer(caller, plan)
    if caller.branch_step is not None and isinstance(request, ops.Start):
        # Its step's own conditions hold the branch lease: the run need only be live, and
        # only a start asks (no step body begins for a run that ended). An end needs no
        # read: it records a body that ran, under the branch lease, and a run that ended
        # meanwhile cancels its steps still pending on their own conditions (an end that
        # lands first is a fact its cleanup leaves as it is; one that comes after is
        # refused), as a retry's next branch delivery reads the run before invoking.
        checks.check_live(caller.claims)
    try:
        written = run_writes.write_leased(caller.lease, plan.writes)
    except run_writes.AlreadyRecorded:
        if caller.branch_step is not None:  # refused for the lease, or for the step?
            checks.check_branch_live(caller.claims)
        step = store.get_step(caller.run_id, plan.step_id)
        return _answer(caller, module.replan(plan, step, fresh.at))
    if plan.cancel_child:
        waits.cancel_run_quietly(plan.cancel_child)
    if plan.result is None:  # the store counted the attempt: from the write, or read back
        attempt = written.get("attempt")
        if attempt is None:
            step = store.get_step(caller.run_id, plan.step_id)
            attempt = step.attempt if step else 1
        return Started(plan.step_id, int(attempt)).to_wire()
    return _answer(caller, plan)


def _answer(caller: Caller, plan: Plan) -> dict[str, Any]:
    result: Result | None = plan.result
    assert result is not None
    if isinstance(result, Recorded):
        return result.to_wire_with(recorded_body(caller, plan.step_id, plan.recorded))
    return result.to_wire()


def recorded_body(caller: Caller, step_id: str, step: Step | None) -> dict[str, Any]:
    """A recorded step as the invoke request shows it (see `service.wire`)."""
    if step is None:
        raise ValidationError(f"step {step_id} was never started")
    return wire.step_body(caller.claims.project_id, caller.run_id, step)


def end_writes(caller: Caller, requests: tuple[ops.EndOp, ...]) -> list[list[Intent]]:
    """The writes of an answer's step ends (protocol 1.3 `ops`, checked by
    `ops.parse_answer_ops`), one list per op, each under its step's own conditions."""
    writes = []
    for request in requests:
        fresh = Fresh.draw()
        prepared = module_of(request).prepare(caller, fresh, request)
        writes.append(module_of(request).plan(caller, fresh, request, prepared, leased=False))
    return [plan.writes for plan in writes]
