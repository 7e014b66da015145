"""How a branch invocation's answer is applied to its step, whoever carried it: the invoker
from a push app's answer (`service.branches`), or the API from a pull worker's posted
outcome (`service.pull_branch`). Each write holds only while the answering branch epoch
still holds the step (`branchEpoch`), so a stale answer changes nothing.

Two shapes (docs/protocol.md section 7). A push app's branch step is started by its lease
take; the SDK runs it without a `start` and its answer carries the step's end (`ops`):
`finish` writes that end, the lease's release and the invocation's events as one
conditional write of the step: with the claim that made and started the step
(`steps_store.take_branch_lease`), the second and last write of a branch. An SDK that
still sends `start` and `complete` (and a pull worker) ended the step by its step call:
the answer then carries no end, and `record_invocation` and `settle` write its event and
see to the lease."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ezgh_engine import clock, ids
from ezgh_engine.adapters import run_writes, steps_store
from ezgh_engine.adapters import waits_store as ws
from ezgh_engine.adapters.intents import NewEvent, StepChange, StepEnd
from ezgh_engine.adapters.run_items import outcome_mark
from ezgh_engine.core import tokens
from ezgh_engine.core.events import EVENT_ID
from ezgh_engine.core.messages import Retry
from ezgh_engine.core.models import Run, RunError
from ezgh_engine.core.protocol_rules import MAX_THROTTLED_DELIVERIES, throttled_delay_seconds
from ezgh_engine.errors import Forbidden, StaleInvocation, ValidationError
from ezgh_engine.protocol import ops as protocol_ops
from ezgh_engine.protocol import outcomes as outcome_rules
from ezgh_engine.service.step_ops import end
from ezgh_engine.service.step_ops.plan import Caller, Fresh


def end_step(run_id: str, step_id: str, epoch: int, status: str, error: RunError) -> None:
    """End the branch's step with an error (cancelled run, unreachable app); the outbox
    asks for its run's next invocation when it sees the end."""
    update = StepChange(
        run_id,
        step_id,
        {
            "status": status,
            "endedAt": clock.iso(clock.now()),
            "error": error.to_api(),
            "branchLeaseUntil": 0,
        },
        "branchEpoch = :e AND #status IN (:waiting, :running)",
        {":e": epoch, ":waiting": "waiting", ":running": "running"},
    )
    run_writes.transact([update])


def release(
    run_id: str, step_id: str, epoch: int, until_ms: int, failures: int, throttles: int = 0
) -> None:
    """Set the step's branch lease to end at `until_ms` (0: released) and its delivery
    failures (and throttled deliveries, when some), if branch epoch `epoch` still holds it."""
    values = {"branchLeaseUntil": until_ms, "branchFailures": failures}
    if throttles:
        values[BRANCH_THROTTLES_ATTR] = throttles
    update = StepChange(run_id, step_id, values, "branchEpoch = :e", {":e": epoch})
    run_writes.transact([update])


BRANCH_THROTTLES_ATTR = steps_store.BRANCH_THROTTLES_ATTR


def throttled(
    run_id: str, step_id: str, epoch: int, failures: int, retry_after: float | None
) -> Retry | None:
    """The branch's step calls stayed throttled (the engine was busy, not the app): deliver
    it again after the throttled backoff, counting no failed delivery (as the invoker does
    for a run, `invoker._throttled`); past `MAX_THROTTLED_DELIVERIES` of the step, None: the
    caller counts it as a failed delivery."""
    raw = ws.get(f"RUN#{run_id}", f"STEP#{step_id}") or {}
    throttles = int(raw.get(BRANCH_THROTTLES_ATTR, 0)) + 1
    if throttles > MAX_THROTTLED_DELIVERIES:
        return None
    delay = throttled_delay_seconds(throttles, retry_after, ids.random_fraction())
    # The attempt the lease take started is kept: the call that stayed throttled may have
    # been the step's end, sent after its body ran (docs/protocol.md section 11: an attempt
    # whose body may have run is never given back). A throttle fails no step and spends no
    # retry: the next lease take starts the next attempt.
    release(run_id, step_id, epoch, clock.now_ms() + int(delay * 1000), failures, throttles)
    return Retry(after_seconds=delay)


def aborted(run_id: str, step_id: str, epoch: int, failures: int) -> Retry | None:
    """The SDK's step call was refused as stale (docs/protocol.md section 2: this delivery's
    hold on the step ran out or another delivery took it, or the run ended): the branch did
    not fail to reach its step, and its step is not failed. Release it (only if this
    delivery still holds it) and let the branch message come back: the next delivery runs
    the step, or finds it ended (or its run) and drops the message, as an `aborted` main
    invocation is invoked again."""
    release(run_id, step_id, epoch, 0, failures)
    return Retry(after_seconds=1)


def settle(run_id: str, step_id: str, epoch: int, attempt_before: int) -> None:
    """After the answer: release the step's lease, or fail a step the branch never ran."""
    after = ws.get(f"RUN#{run_id}", f"STEP#{step_id}") or {}
    # A step this invocation started (its attempt moved) that is `waiting` again is a retry
    # that came due before the answer: the stream has sent its next branch message.
    retry_due = after.get("status") == "waiting" and int(after.get("attempt", 0)) != attempt_before
    if after.get("status") in ("waiting", "running") and not retry_due:
        # The SDK answered without ending its step (it never reached it): fail it, so the
        # main invocation replays and meets whatever went wrong itself.
        error = RunError(
            "workflows.nondeterminism",
            "BranchNotRun",
            f"the branch invocation did not run step {step_id}",
        )
        end_step(run_id, step_id, epoch, "failed", error)
    elif int(after.get("branchLeaseUntil", 0)) or int(after.get("branchFailures", 0)):
        release(run_id, step_id, epoch, 0, 0)  # (a step's end released it already)


def record_invocation(
    run_id: str,
    attempt: int,
    step_id: str,
    invocation_id: str,
    started_at: str,
    outcome: outcome_rules.Outcome,
) -> None:
    expires = int(clock.now().timestamp()) + run_writes.CHILD_ITEM_TTL_SECONDS
    fields = {
        EVENT_ID: ids.time_ordered_id(),  # the outcome's own ID
        "invocationId": invocation_id,
        "deploymentId": outcome.deployment_id,
        "stepId": step_id,
        "startedId": invocation_id,
        "startedAt": started_at,
    }
    # One item, keyed by its earliest event (the start): the outcome, carrying the start
    # (`core.events`).
    event = NewEvent(
        run_id,
        attempt,
        f"invocation.{outcome.kind}",
        clock.iso(clock.now()),
        expires,
        invocation_id,
        fields,
    )
    run_writes.write_each([event])


def branch_end(
    answer: dict[str, Any], step_id: str
) -> protocol_ops.Complete | protocol_ops.Fail | None:
    """The step end a branch answer carries (`ops`: one `complete` or `fail` of its own step,
    when the engine started the step), None when it carries none; `MalformedOutcome` for
    anything else (a failed delivery, as any answer the protocol does not allow)."""
    ops = answer.get("ops")
    if ops is None or ops == []:
        return None
    if answer.get("outcome") != "branch" or not isinstance(ops, list) or len(ops) != 1:
        raise outcome_rules.MalformedOutcome("a branch answer's ops end its one step")
    try:
        request = protocol_ops.parse_op(ops[0], step_id)
    except (ValidationError, Forbidden) as exc:
        raise outcome_rules.MalformedOutcome(f"ops: {exc}") from None
    if not isinstance(request, protocol_ops.Complete | protocol_ops.Fail):
        raise outcome_rules.MalformedOutcome("a branch answer's ops end its one step")
    return request


def finish(
    run: Run,
    epoch: int,
    attempt: int,
    request: protocol_ops.Complete | protocol_ops.Fail,
    *,
    invocation_id: str,
    started_at: str,
    deployment_id: str | None,
) -> bool:
    """Write the end a branch answer carried, of the step attempt `attempt` its lease (branch
    epoch `epoch`) started: one conditional write of the step (with a failure's event item,
    a transaction of two) that also releases the lease and carries the invocation's events.
    False, writing nothing, when the step is not that attempt's any more (another delivery
    took it, or it ended: cancelled with its run, failed by a timeout, or this very answer
    written already): a duplicate or late answer never records twice."""
    step_id = request.step_id
    claims = tokens.InvocationClaims(run.id, run.project_id, epoch, run.attempt, 0, step_id)
    caller = Caller(claims, deployment_id)
    fresh = Fresh.draw()
    try:  # (a large output is kept first, after a check that the branch still holds)
        prepared = end.prepare(caller, fresh, request)
    except StaleInvocation:
        return False
    plan = end.plan(caller, fresh, request, prepared, leased=False)
    assert isinstance(plan.item, StepEnd)
    mark = outcome_mark(
        event_id=ids.time_ordered_id(),
        kind="branch",
        at=clock.iso(clock.now()),
        attempt=run.attempt,
        invocation_id=invocation_id,
        started_at=started_at,
        deployment_id=deployment_id,
    )
    item = replace(plan.item, attempt=attempt, answered=mark)
    try:
        run_writes.write([item, *plan.others])
    except run_writes.AlreadyRecorded:
        return False
    return True
