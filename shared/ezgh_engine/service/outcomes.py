"""Write what an invocation answered, under its lease: the step ends it carried, ahead, and
its outcome, committed by one conditional write of the run item (`adapters.run_writes`)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ezgh_engine import clock, ids
from ezgh_engine.adapters import payloads, run_writes, runs_store
from ezgh_engine.adapters import run_items as items
from ezgh_engine.adapters.intents import EndCommit, EventSegments, SuspendCommit
from ezgh_engine.core import tokens, validation
from ezgh_engine.core.models import Run, RunError
from ezgh_engine.core.protocol_rules import THROTTLED_OUTCOME
from ezgh_engine.core.run_errors import MAX_PENDING_STEPS, too_many_pending_steps
from ezgh_engine.errors import EngineError, StaleInvocation
from ezgh_engine.protocol import ops as protocol_ops
from ezgh_engine.protocol.outcomes import Outcome
from ezgh_engine.service import steps, waits


class OpsConflict(Exception):
    """The answer's held step ends name steps recorded with other outcomes (another
    invocation recorded them first): the answer was computed from values the run does not
    hold, so it is not applied; the run must be invoked again and replay the recorded ones."""

    def __init__(self, step_ids: list[str]) -> None:
        super().__init__(f"steps recorded with other outcomes: {', '.join(step_ids)}")
        self.step_ids = step_ids


PENDING = frozenset({"sleeping", "waiting", "retrying"})
# Outcomes that record nothing on the run (see `apply`).
NOTHING_TO_WRITE = frozenset({"aborted", "branch", THROTTLED_OUTCOME})


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
    """Record an invocation's answer: the step ends it carried (protocol 1.3 `ops`), each
    written ahead with its own conditions as a step call writes it, and then its outcome
    (`apply`). When a step refuses its end, the ends are applied one by one (each answering
    what is recorded) and then the outcome, unless a step holds another outcome than the
    answer says (`OpsConflict`). `StaleInvocation` when the lease was lost;
    `ValidationError` when the ops are malformed."""
    ends: dict[str, Any] = {
        "invocation_id": invocation_id,
        "started_at": started_at,
        "notify": notify,
    }
    if ops is not None and outcome.kind not in NOTHING_TO_WRITE:
        write_held_ends(outcome, ops, claims=claims)
    apply(run, seq, outcome, **ends)


def write_held_ends(outcome: Outcome, ops: Any, *, claims: tokens.InvocationClaims) -> None:
    """Write the step ends an answer carried (protocol 1.3 `ops`), each ahead with its own
    conditions as a step call writes it; when a step refuses its end, one by one (each
    answering what is recorded). `OpsConflict` when a step holds another outcome than the
    answer says; `StaleInvocation` when the lease was lost; `ValidationError` when the ops
    are malformed. Also what a `throttled` answer carries: the ends of steps that ran
    before the engine stayed busy, so they do not run again."""
    ops = protocol_ops.parse_answer_ops(ops, claims.step_id)  # once: both paths take it
    writes = steps.answer_writes(claims, outcome.deployment_id, ops)
    if not writes:
        return
    steps.check_not_taken_over(claims)  # no end ahead for a run that moved on
    try:
        for op_writes in writes:  # a step's end (and a failure's event) at a time
            run_writes.write(op_writes)
    except run_writes.AlreadyRecorded:
        _apply_ops_one_by_one(claims, outcome, ops)


def _apply_ops_one_by_one(
    claims: tokens.InvocationClaims, outcome: Outcome, ops: protocol_ops.AnswerOps
) -> None:
    """Apply the answer's ops each with its own conditions, as step calls are; `OpsConflict`
    when a step was recorded with another outcome than its op says."""
    conflicts = steps.apply_answer_ops(claims, outcome.deployment_id, ops)
    if conflicts:
        raise OpsConflict(conflicts)


def apply(
    run: Run,
    seq: int,
    outcome: Outcome,
    *,
    invocation_id: str,
    started_at: str,
    notify: bool | None = None,
) -> None:
    """Record the outcome: one conditional write of the run item commits it and carries its
    event, after what it writes ahead (docs/architecture.md, "An outcome's writes").
    `StaleInvocation` when the lease was lost meanwhile."""
    if outcome.kind in NOTHING_TO_WRITE:
        # `branch`: only branch invocations answer it (service.branches); `aborted`: the
        # invocation gave up its lease to a newer one; `throttled`: the engine was busy, the
        # invocation is delivered again (a pull task: when its lease ends). Nothing to write.
        return
    now = clock.now()
    at = clock.iso(now)
    mark = items.outcome_mark(
        event_id=ids.time_ordered_id(),
        kind=outcome.kind,
        at=at,
        attempt=run.attempt,
        invocation_id=invocation_id,
        started_at=started_at,
        deployment_id=outcome.deployment_id,
    )
    pending = len(outcome.waits) + len(outcome.sleeps)
    if outcome.kind == "suspended" and pending > MAX_PENDING_STEPS:
        # Never a suspend too wide to start: the run fails at once, saying why.
        outcome = replace(outcome, kind="failed", error=too_many_pending_steps(pending))
        mark["k"] = outcome.kind
    events = run_writes.event_segments(
        run.id, [e for s in run.steps for e in s.events], run.events_through or "", clock.now_ms()
    )
    if outcome.kind == "suspended":
        run_writes.commit(replace(_suspend(run, seq, outcome, at, mark), events=events))
        return
    try:
        _end(run, seq, outcome, mark, at, now, notify, events)
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
            notify=notify,
        )


def _suspend(run: Run, seq: int, outcome: Outcome, at: str, mark: dict[str, Any]) -> SuspendCommit:
    """The new waits recorded and the lease released: sleeps are written ahead, what other
    waits start is launched once the suspend has committed."""
    expires = int(clock.now().timestamp()) + run_writes.CHILD_ITEM_TTL_SECONDS
    known = {s.id for s in run.steps}
    ahead = [
        waits.sleep_step(
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
    new = [
        waits.suspend_writes(run, wait, at=at, order=ids.time_ordered_id())
        for wait in outcome.waits
        if wait.step_id not in known
    ]
    return SuspendCommit(
        run,
        seq,
        mark,
        ahead=(*ahead, *(step for wait in new for step in wait.ahead)),
        launches=tuple(wait.launch for wait in new if wait.launch is not None),
        again=any(wait.ended_at_once for wait in new),
    )


def _end(
    run: Run,
    seq: int,
    outcome: Outcome,
    mark: dict[str, Any],
    at: str,
    now: Any,
    notify: bool | None,
    events: EventSegments | None = None,
) -> None:
    """End the run from `outcome`, conditional on the status the invocation saw."""
    status, error, text, ref = _ending(run, outcome)
    # The run's end rides the invocation's event too (listed after its outcome).
    run_end: dict[str, Any] = {"id": ids.time_ordered_id(), "type": f"run.{status}"}
    if error is not None:
        run_end["error"] = error.to_api()
    run_writes.commit(
        EndCommit(
            run,
            seq,
            {**mark, "e": run_end},
            status,
            at,
            int(now.timestamp()),
            output_text=text,
            output_ref=ref,
            error=error,
            notify=notify,
            events=events,
        )
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
    if run_writes.inline(text):
        return "completed", None, text, None
    runs_store.put_payload(run.project_id, run.id, payloads.RUN_OUTPUT_PATH, text)
    return "completed", None, None, payloads.RUN_OUTPUT_PATH
