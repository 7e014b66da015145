"""Write what an invocation answered, under its lease."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ezgh_engine import clock, ids
from ezgh_engine.adapters import ddb, payloads, runs_store
from ezgh_engine.adapters import invocations_store as store
from ezgh_engine.config import settings
from ezgh_engine.core import tokens, validation
from ezgh_engine.core.models import Run, RunError
from ezgh_engine.core.outcomes import Outcome
from ezgh_engine.errors import EngineError, StaleInvocation


def _events(
    run: Run, outcome: Outcome, invocation_id: str, started_at: str, at: str
) -> list[dict[str, Any]]:
    """The invocation's one event item: its outcome, carrying its start (listed as
    `invocation.started`, see `run_items.expand_event`)."""
    expires = int(clock.now().timestamp()) + runs_store.CHILD_ITEM_TTL_SECONDS
    return [
        runs_store.event_put(
            run.id,
            run.attempt,
            f"invocation.{outcome.kind}",
            at,
            expires,
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
    outcome, in one transaction. When a step refuses its end, the ends are applied one by one
    (each answering what is recorded) and then the outcome, unless a step holds another
    outcome than the answer says (`OpsConflict`). `StaleInvocation` when the lease was lost;
    `ValidationError` when the ops are malformed."""
    from ezgh_engine.service import steps

    ends: dict[str, Any] = {
        "invocation_id": invocation_id,
        "started_at": started_at,
        "notify": notify,
    }
    if ops is None or outcome.kind in ("aborted", "branch"):
        apply(run, seq, outcome, **ends)
        return
    writes = steps.answer_actions(claims, outcome.deployment_id, ops)
    # Actions, not ops: a failure is two (its step, its event), a wait up to three.
    waits = len(outcome.waits) + len(outcome.sleeps)
    if writes and len(writes) + 3 * waits <= MAX_ENDS_IN_OUTCOME:
        try:
            apply(run, seq, outcome, step_writes=writes, **ends)
            return
        except store.StepsRefused:
            pass
    conflicts = steps.apply_answer_ops(claims, outcome.deployment_id, ops)
    if conflicts:
        raise OpsConflict(conflicts)
    apply(run, seq, outcome, **ends)


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
    """Record the outcome (with `step_writes`, the answer's step ends: `StepsRefused` when
    one is refused); raises `StaleInvocation` when the lease was lost meanwhile."""
    now = clock.now()
    at = clock.iso(now)
    events = _events(run, outcome, invocation_id, started_at, at)
    expires = int(now.timestamp()) + runs_store.CHILD_ITEM_TTL_SECONDS
    if outcome.kind == "suspended":
        from ezgh_engine.service import waits

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
        )
        return
    if outcome.kind == "branch":
        return  # only branch invocations answer this (service.branches)
    if outcome.kind == "aborted":
        return  # the invocation gave up its lease to a newer one: nothing to write
    try:
        _end(run, seq, outcome, events, at, now, step_writes, notify)
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


def _end(
    run: Run,
    seq: int,
    outcome: Outcome,
    events: list[dict[str, Any]],
    at: str,
    now: Any,
    step_writes: list[dict[str, Any]] | None,
    notify: bool | None,
) -> None:
    """End the run from `outcome`, conditional on the status the invocation saw."""
    status, error, text, ref = _ending(run, outcome)
    # The run's end rides the invocation's item too (listed after its outcome).
    run_end: dict[str, Any] = {"id": ids.time_ordered_id(), "type": f"run.{status}"}
    if error is not None:
        run_end["error"] = error.to_api()
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
    )
    if status != "completed" or any(s.status in PENDING for s in run.steps):
        # A run that ends leaves no step pending (a retry, a wait, a sleep): each ends
        # `cancelled`, its timer then finds nothing, and a RetryRun records it afresh.
        from ezgh_engine.service import waits

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
    payloads.put(run.project_id, run.id, payloads.RUN_OUTPUT_PATH, text)
    return "completed", None, None, payloads.RUN_OUTPUT_PATH
