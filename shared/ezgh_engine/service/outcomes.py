"""Write what an invocation answered, under its lease."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ezgh_engine import clock, ids
from ezgh_engine.adapters import ddb, payloads, runs_store, steps_store
from ezgh_engine.adapters import invocations_store as store
from ezgh_engine.adapters import run_items as items
from ezgh_engine.config import settings
from ezgh_engine.core import tokens, validation
from ezgh_engine.core.models import Run, RunError
from ezgh_engine.errors import EngineError, StaleInvocation
from ezgh_engine.protocol import ops as protocol_ops
from ezgh_engine.protocol.outcomes import Outcome
from ezgh_engine.service import steps, waits


def _events(
    run: Run, outcome: Outcome, invocation_id: str, started_at: str, at: str, event_id: str
) -> list[dict[str, Any]]:
    """The invocation's one event item, for an outcome written in one transaction: its
    outcome, carrying its start (listed as `invocation.started`, see
    `run_items.expand_event`)."""
    expires = int(clock.now().timestamp()) + runs_store.CHILD_ITEM_TTL_SECONDS
    return [
        runs_store.event_put(
            run.id,
            run.attempt,
            f"invocation.{outcome.kind}",
            at,
            expires,
            event_id=event_id,
            invocationId=invocation_id,
            deploymentId=outcome.deployment_id,
            startedId=invocation_id,  # minted when the invocation began: it sorts first
            startedAt=started_at,
        )
    ]


class OpsConflict(Exception):
    """The answer's held step ends name steps recorded with other outcomes (another
    invocation recorded them first): the answer was computed from values the run does not
    hold, so it is not applied; the run must be invoked again and replay the recorded ones."""

    def __init__(self, step_ids: list[str]) -> None:
        super().__init__(f"steps recorded with other outcomes: {', '.join(step_ids)}")
        self.step_ids = step_ids


PENDING = frozenset({"sleeping", "waiting", "retrying"})

# Past this many held ends and waits, the ends are written before the outcome, not in its
# transaction (DynamoDB takes 100 actions a transaction).
MAX_ENDS_IN_OUTCOME = 60


def apply_answer(
    run: Run,
    seq: int,
    outcome: Outcome,
    ops: Any,
    *,
    claims: tokens.InvocationClaims,
    invocation_id: str,
    started_at: str,
    notify: bool | None = None,
) -> None:
    """Record an invocation's answer: the step ends it carried (protocol 1.3 `ops`) and its
    outcome. An end, or a suspend on sleeps only, writes the ends first, each with its own
    conditions, and then commits with one conditional write of the run item (`apply`); an
    outcome with other new waits writes all of it in one transaction. When a step refuses
    its end, the ends are applied one by one (each answering what is recorded) and then the
    outcome, unless a step holds another outcome than the answer says (`OpsConflict`).
    `StaleInvocation` when the lease was lost; `ValidationError` when the ops are
    malformed."""
    ends: dict[str, Any] = {
        "invocation_id": invocation_id,
        "started_at": started_at,
        "notify": notify,
    }
    if ops is None or outcome.kind in ("aborted", "branch"):
        apply(run, seq, outcome, **ends)
        return
    ops = protocol_ops.parse_answer_ops(ops, claims.step_id)  # once: both paths take it
    writes = steps.answer_writes(claims, outcome.deployment_id, ops)
    if writes and _commits_alone(run, outcome):
        steps.check_not_taken_over(claims)  # no end ahead for a run that moved on
        try:
            for op_writes in writes:  # a step's end (and a failure's event) at a time
                steps_store.write(op_writes)
        except steps_store.AlreadyRecorded:
            _apply_ops_one_by_one(claims, outcome, ops)
        apply(run, seq, outcome, **ends)
        return
    flat = [action for op_writes in writes for action in op_writes]
    # Actions, not ops: a failure is two (its step, its event), a wait up to three.
    waits = len(outcome.waits) + len(outcome.sleeps)
    if flat and len(flat) + 3 * waits <= MAX_ENDS_IN_OUTCOME:
        try:
            apply(run, seq, outcome, step_writes=flat, **ends)
            return
        except store.StepsRefused:
            pass
    _apply_ops_one_by_one(claims, outcome, ops)
    apply(run, seq, outcome, **ends)


def _apply_ops_one_by_one(
    claims: tokens.InvocationClaims, outcome: Outcome, ops: protocol_ops.AnswerOps
) -> None:
    """Apply the answer's ops each with its own conditions, as step calls are; `OpsConflict`
    when a step was recorded with another outcome than its op says."""
    conflicts = steps.apply_answer_ops(claims, outcome.deployment_id, ops)
    if conflicts:
        raise OpsConflict(conflicts)


def _commits_alone(run: Run, outcome: Outcome) -> bool:
    """Whether the outcome commits with one conditional write of the run item, after its
    other items (docs/architecture.md, "An outcome's writes"): an end, or a suspend whose
    new waits are sleeps only. A new wait of another kind (a child run, a message waiter,
    a branch) is written in the outcome's transaction, as before."""
    if outcome.kind != "suspended":
        return outcome.kind in ("completed", "failed", "cancelled")
    known = {s.id for s in run.steps}
    return all(w.step_id in known for w in outcome.waits)


def apply(
    run: Run,
    seq: int,
    outcome: Outcome,
    *,
    invocation_id: str,
    started_at: str,
    step_writes: list[dict[str, Any]] | None = None,
    notify: bool | None = None,
) -> None:
    """Record the outcome (with `step_writes`, the answer's step ends in the outcome's
    transaction: `StepsRefused` when one is refused); raises `StaleInvocation` when the
    lease was lost meanwhile. Without `step_writes`, an end or a suspend on sleeps commits
    with one conditional write of the run item, which carries the outcome's event."""
    now = clock.now()
    at = clock.iso(now)
    single = not step_writes and _commits_alone(run, outcome)
    event_id = ids.time_ordered_id()
    events = [] if single else _events(run, outcome, invocation_id, started_at, at, event_id)
    mark = None
    if single:
        mark = items.outcome_mark(
            event_id=event_id,
            kind=outcome.kind,
            at=at,
            attempt=run.attempt,
            invocation_id=invocation_id,
            started_at=started_at,
            deployment_id=outcome.deployment_id,
        )
    if outcome.kind == "suspended":
        _suspend(run, seq, outcome, at, events, step_writes, mark)
        return
    if outcome.kind == "branch":
        return  # only branch invocations answer this (service.branches)
    if outcome.kind == "aborted":
        return  # the invocation gave up its lease to a newer one: nothing to write
    try:
        _end(run, seq, outcome, events, mark, at, now, step_writes, notify)
    except StaleInvocation:
        current = runs_store.get_run(run.id, with_steps=False)
        if current is None or current.ended or current.epoch != run.epoch:
            raise
        if current.status == run.status:
            raise
        # A cancel came while the invocation ran: its end is written again from the status
        # the run has now (a cancelling run ends cancelled however the workflow ended).
        apply(
            replace(run, status=current.status),
            seq,
            outcome,
            invocation_id=invocation_id,
            started_at=started_at,
            step_writes=step_writes,
            notify=notify,
        )


def _suspend(
    run: Run,
    seq: int,
    outcome: Outcome,
    at: str,
    events: list[dict[str, Any]],
    step_writes: list[dict[str, Any]] | None,
    mark: dict[str, Any] | None,
) -> None:
    """Record the new waits and release the lease (`store.suspend`)."""
    expires = int(clock.now().timestamp()) + runs_store.CHILD_ITEM_TTL_SECONDS
    known = {s.id for s in run.steps}
    puts = [
        store.put_sleep_step(
            run,
            step_id=s.step_id,
            name=s.name,
            order=ids.time_ordered_id(),
            started_at=at,
            wake_at=clock.iso(s.wake_at),
            expires=expires,
        )
        for s in outcome.sleeps
        if s.step_id not in known
    ]
    for wait in outcome.waits:
        if wait.step_id not in known:
            puts += waits.suspend_actions(run, wait, at=at, order=ids.time_ordered_id())
    store.suspend(
        run,
        seq,
        step_puts=puts,
        events=events,
        step_writes=step_writes or (),
        again=waits.ended_at_once(puts),
        mark=mark,
    )


def _end(
    run: Run,
    seq: int,
    outcome: Outcome,
    events: list[dict[str, Any]],
    mark: dict[str, Any] | None,
    at: str,
    now: Any,
    step_writes: list[dict[str, Any]] | None,
    notify: bool | None,
) -> None:
    """End the run from `outcome`, conditional on the status the invocation saw."""
    status, error, text, ref = _ending(run, outcome)
    # The run's end rides the invocation's event too (listed after its outcome).
    run_end: dict[str, Any] = {"id": ids.time_ordered_id(), "type": f"run.{status}"}
    if error is not None:
        run_end["error"] = error.to_api()
    if mark is not None:
        mark["e"] = run_end
        store.write_ahead(run)
    else:
        events[0]["Put"]["Item"]["runEnd"] = ddb.to_attr(run_end)
    store.end_run(
        run,
        seq,
        status=status,
        ended_at=at,
        ended_epoch_s=int(now.timestamp()),
        output_text=text,
        output_ref=ref,
        error=error,
        events=events,
        step_writes=step_writes or (),
        notify=notify,
        mark=mark,
    )
    if status != "completed" or any(s.status in PENDING for s in run.steps):
        # A run that ends leaves no step pending (a retry, a wait, a sleep): each ends
        # `cancelled`, its timer then finds nothing, and a RetryRun records it afresh.
        waits.cancel_leftovers(run.id)


def _ending(run: Run, outcome: Outcome) -> tuple[str, RunError | None, str | None, str | None]:
    # Once cancelling, the run ends cancelled however the workflow ended.
    if outcome.kind == "cancelled" or run.status == "cancelling":
        return "cancelled", None, None, None
    if outcome.kind == "failed":
        return "failed", outcome.error, None, None
    try:
        text = validation.encode_value(outcome.output, "output")
    except EngineError as exc:
        error = RunError(
            "workflows.output_too_large" if exc.status == 413 else "workflows.invalid_value",
            "InvalidOutputError",
            exc.message,
        )
        return "failed", error, None, None
    if len(text.encode()) <= settings().payload_inline_bytes:
        return "completed", None, text, None
    runs_store.put_payload(run.project_id, run.id, payloads.RUN_OUTPUT_PATH, text)
    return "completed", None, None, payloads.RUN_OUTPUT_PATH
